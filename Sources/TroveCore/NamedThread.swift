public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension Thread {
    /// Starts a thread named `name` that runs `body`, and returns it.
    ///
    /// The name is what `top -H`, `ps -T` and a debugger show, so an operator can tell Trove's
    /// threads apart. It is set on the new thread itself: on Linux a name given before
    /// `start()` never reaches the thread, which then shows its creator's name, and the kernel
    /// takes at most 15 bytes (a longer name is refused, not cut) — hence the precondition. The
    /// kernel's name is written directly (`/proc/thread-self/comm`, which is what glibc's
    /// `pthread_setname_np` does too; Swift's Glibc module does not export that function):
    /// `Thread.current.name` does nothing until `start()` has stored the thread's handle, which
    /// the new thread can outrun.
    @discardableResult
    public static func start(
        named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void
    ) -> Thread {
        precondition(name.utf8.count <= 15, "a thread name takes at most 15 bytes on Linux: \(name)")
        let thread = Thread {
            nameCallingThread(name)
            body()
        }
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
        return thread
    }
}

/// Sets the calling thread's name in the kernel; a failure (no `/proc`) leaves the old name.
private func nameCallingThread(_ name: String) {
    #if canImport(Glibc)
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = Array(name.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    #endif
}
