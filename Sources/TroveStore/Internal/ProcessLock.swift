/// The exclusive lock on a store directory: an flock on `<store>/LOCK`, which also holds the
/// owner's pid so that a second opener can name it.
///
/// The kernel releases an flock when its descriptor closes, so a crashed owner never leaves
/// a store locked. flock locks belong to open file descriptions: a second `Store` on the same
/// directory in the same process is refused too.
final class ProcessLock: Sendable {
    let path: String
    private let descriptor: Int32

    /// Takes the lock or throws ``StoreError/Code/locked`` naming the owner's pid.
    init(path: String) throws(StoreError) {
        let fd = try SystemCall.openLockFile(path)
        do throws(StoreError) {
            var waited = 0
            while !(try SystemCall.tryLock(fd, path: path)) {
                let owner = String(decoding: SystemCall.readAll(fd, limit: 32), as: UTF8.self).filter(\.isNumber)
                // A lock this process held a moment ago may still be held by a child process it
                // started (a fork holds copies of every descriptor until its exec closes them):
                // wait a little before refusing. Another process's lock is refused at once.
                if owner == String(SystemCall.processID) && waited < 500 {
                    SystemCall.pause(milliseconds: 5)
                    waited += 5
                    continue
                }
                throw StoreError(
                    code: .locked,
                    message: "the store is in use by process \(owner.isEmpty ? "(unknown pid)" : owner) "
                        + "(lock file \(path)); close it there or use another --store")
            }
        } catch {
            SystemCall.close(fd)
            throw error
        }
        SystemCall.replaceContents(fd, with: Array("\(SystemCall.processID)\n".utf8))
        self.path = path
        self.descriptor = fd
    }

    deinit { SystemCall.close(descriptor) }
}
