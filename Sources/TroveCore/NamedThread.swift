public import Foundation

extension Thread {
    /// Starts a thread named `name` that runs `body`, and returns it.
    ///
    /// The name is what `top -H`, `ps -T` and a debugger show, so an operator can tell Trove's
    /// threads apart. It is set on the new thread itself: on Linux a name given before
    /// `start()` never reaches the thread, which then shows its creator's name, and the kernel
    /// takes at most 15 bytes (a longer name is refused, not cut) — hence the precondition.
    @discardableResult
    public static func start(
        named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void
    ) -> Thread {
        precondition(name.utf8.count <= 15, "a thread name takes at most 15 bytes on Linux: \(name)")
        let thread = Thread {
            Thread.current.name = name
            body()
        }
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
        return thread
    }
}
