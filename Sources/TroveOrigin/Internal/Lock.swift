#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a `pthread_mutex_t`, reachable only inside ``withLock(_:)``.
///
/// The origin runs inside test processes that may run under ThreadSanitizer, which does not see
/// `Synchronization.Mutex` on Swift 6.3.1/Linux (PLATFORM.md) but does see pthread mutexes. This
/// module depends on SwiftNIO alone, so it keeps its own small copy of TroveCore's `Locked`.
///
/// `@unchecked Sendable`: the value is read and written only between `pthread_mutex_lock` and
/// `pthread_mutex_unlock` on the mutex this object owns.
final class Lock<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
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

    /// Runs `body` with exclusive access to the value. Never hold it across I/O or an `await`.
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
