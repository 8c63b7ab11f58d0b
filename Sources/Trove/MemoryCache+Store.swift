public import TroveStore

extension MemoryCache {
    /// Makes this cache the observer of a store opened with `configuration`, after any observer
    /// already set there (both are called, this cache first).
    ///
    /// The store then reports every key whose value changes or goes away, by any path — a put,
    /// ``Store/updateMetadata(_:for:)``, a removal, expiry and eviction by the compactor, a
    /// damaged record dropped, repair, a rebuild, opening's replay — and this cache drops that
    /// key (``apply(_:)``). The store keeps the cache alive as long as it keeps the
    /// configuration.
    ///
    /// ```swift
    /// var configuration = Store.Configuration()
    /// memory.attach(to: &configuration)
    /// let store = try Store(directory: path, configuration: configuration)
    /// ```
    public func attach(to configuration: inout Store.Configuration) {
        let previous = configuration.keyChanges
        configuration.keyChanges = { change in
            self.apply(change)
            previous?(change)
        }
    }

    /// Applies one change a store reported: ``KeyChange/Kind/stored`` and
    /// ``KeyChange/Kind/removed`` drop the key (and refuse guarded inserts with tokens taken
    /// before); ``KeyChange/Kind/relocated`` changes nothing (same bytes, another place).
    ///
    /// ``attach(to:)`` calls it; call it yourself only if you set
    /// ``Store/Configuration/keyChanges`` by hand. It takes one shard's lock and returns at once,
    /// as the store requires of its observer.
    public func apply(_ change: KeyChange) {
        switch change.kind {
        case .stored, .removed: remove(change.key)
        case .relocated: break
        }
    }
}
