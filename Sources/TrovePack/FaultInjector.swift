/// The seam through which tests make the pack layer's file I/O fail (LevelDB's fault-injecting
/// `Env`): every system call of a segment or of the packs directory asks the injector first.
///
/// Production stores have none (``Store.Configuration`` sets it only through
/// `@_spi(Testing)`); the cost is one nil check per system call.
///
/// ```swift
/// // Fail the 5th write with ENOSPC after writing 10 bytes of it.
/// let writes = Locked(0)
/// let faults = FaultInjector { operation, _ in
///     guard operation == .write else { return nil }
///     return writes.withLock { $0 += 1; return $0 } == 5 ? .shortWrite(10, ENOSPC) : nil
/// }
/// ```
public final class FaultInjector: Sendable {
    /// A kind of system call.
    public enum Operation: String, Sendable, CaseIterable {
        /// open(2) of a segment or of the packs directory.
        case open
        /// pread(2).
        case read
        /// pwrite(2).
        case write
        /// fdatasync(2) of a segment, fsync(2) of the packs directory.
        case sync
        /// rename(2).
        case rename
        /// unlink(2).
        case unlink
        /// ftruncate(2).
        case truncate
    }

    /// What the injected call does instead of succeeding.
    public enum Fault: Sendable, Equatable {
        /// Fail with this errno, doing nothing.
        case error(Int32)
        /// For writes: write this many bytes, then fail with the errno.
        case shortWrite(Int, Int32)
    }

    private let decide: @Sendable (Operation, String) -> Fault?

    /// Makes an injector; `decide` is called before every system call with its kind and path,
    /// from any thread, and returns the fault to inject or nil to let the call run.
    public init(_ decide: @escaping @Sendable (Operation, String) -> Fault?) {
        self.decide = decide
    }

    func fault(_ operation: Operation, _ path: String) -> Fault? {
        decide(operation, path)
    }
}
