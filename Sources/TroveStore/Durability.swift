/// How hard a store works to keep acknowledged writes across a crash of the machine.
///
/// Whatever the level, pack bytes are written before the index row that points at them is
/// committed, and a process crash (SIGKILL) loses no acknowledged write: the bytes are in the
/// page cache and recovery replays them from the active segment. The levels differ in what a
/// power loss or kernel crash can take (Docs/Architecture.md, "Durability").
///
/// When an `fdatasync` fails (`batched`, `full`), the store refuses writes with
/// ``StoreError/Code/syncFailed`` until it is reopened, rather than retry a sync that the
/// kernel would report as successful whether or not the bytes reached the disk.
public enum Durability: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Never fsync. A power loss can lose any writes the kernel had not yet written back.
    case none
    /// The committer thread fdatasyncs the pack and commits the index every
    /// ``Store/Configuration/batchInterval`` or ``Store/Configuration/batchSize`` writes,
    /// whichever comes first. A power loss can lose the writes not yet synced (normally the
    /// last 10 ms; under load, at most eight batches plus two records per writing thread and
    /// the tombstones of a batch removal in progress).
    /// The default.
    case batched
    /// Every put and remove is fdatasynced before it returns; concurrent writers share one
    /// fdatasync. The index catches up in the background as under `batched` (a write does not
    /// wait for it: the packs carry durability, and recovery replays what the index had not
    /// committed). A power loss loses nothing that was acknowledged.
    case full

    public var description: String { rawValue }
}
