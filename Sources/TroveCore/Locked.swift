#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a mutex: the value is reachable only inside ``withLock(_:)``.
///
/// Why not `Synchronization.Mutex`: with Swift 6.3.1 on Linux, ThreadSanitizer does not see
/// `Mutex`'s futex-based locking and reports every pair of accesses inside `withLock` as a
/// race, which would make Trove's TSan runs useless. A `pthread_mutex_t` is intercepted by
/// TSan, so races found with `Locked` are real. Swap back once `Mutex` is TSan-visible.
///
/// Hold the lock for state changes only, never across an `await`.
///
/// `@unchecked Sendable`: the stored value is read and written only between
/// `pthread_mutex_lock` and `pthread_mutex_unlock` on the mutex this object owns.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    /// Makes a lock guarding `value`.
    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body(&valueStorage)
    }

    /// Runs `body` with exclusive access to the value if the lock is free now; nil, without
    /// running it, when another thread holds it.
    @inlinable
    public func withLockIfAvailable<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R? {
        guard tryLock() else { return nil }
        defer { unlock() }
        return try body(&valueStorage)
    }

    @usableFromInline
    var valueStorage: Value {
        _read { yield value }
        _modify { yield &value }
    }

    @usableFromInline
    func lock() { pthread_mutex_lock(mutex) }

    @usableFromInline
    func unlock() { pthread_mutex_unlock(mutex) }

    @usableFromInline
    func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }
}
