import CoreMetrics
import TroveCore

extension ImagePipeline {
    /// A snapshot of a pipeline's counters since it was made (``ImagePipeline/statistics``).
    /// The same counts go to swift-metrics (``PipelineMetrics``).
    public struct Statistics: Hashable, Sendable, Codable {
        /// Responses served fresh from the memory tier.
        public var memoryHits = 0
        /// Responses served fresh from the store.
        public var diskHits = 0
        /// Responses served from the store after a 304.
        public var revalidatedHits = 0
        /// Responses whose bytes (or whose original's) came from the origin in a 200.
        public var networkResponses = 0
        /// Stale responses served (stale-while-revalidate or stale-if-error).
        public var staleResponses = 0
        /// Conditional requests sent (foreground and background).
        public var revalidations = 0
        /// Background revalidations started for stale-while-revalidate.
        public var backgroundRevalidations = 0
        /// 304 answers received.
        public var notModified = 0
        /// 200 answers received.
        public var fetches = 0
        /// Body bytes received in 200 answers.
        public var bytesFetched = 0
        /// Callers that joined a stage (an original's or a variant's) another caller had started.
        public var coalescedWaiters = 0
        /// Variants made (decoded, resampled, encoded).
        public var variantsMade = 0
        /// Requests whose caller cancelled.
        public var cancellations = 0
        /// Requests that failed.
        public var failures = 0
        /// Originals and variants served without being stored because the store failed to
        /// write them (a full or failing disk, a failed sync); their `info` is nil.
        public var unstoredResponses = 0

        /// All zero.
        public init() {}
    }

    /// The counters so far.
    public var statistics: Statistics { counters.withLock { $0 } }
}

/// The pipeline's counters in swift-metrics, labelled `<prefix>_<name>_total`: whatever
/// backend the application bootstrapped (`MetricsSystem.bootstrap`) before making the pipeline
/// receives them.
///
/// | label | counts |
/// |---|---|
/// | `_responses_total{source=memory\|disk\|revalidated\|network\|stale}` | responses by where they came from |
/// | `_revalidations_total` | conditional requests sent |
/// | `_not_modified_total` | 304 answers |
/// | `_fetches_total` | 200 answers |
/// | `_fetched_bytes_total` | body bytes of 200 answers |
/// | `_coalesced_waiters_total` | callers that joined work in flight |
/// | `_variants_made_total` | variants made |
/// | `_cancellations_total` | requests whose caller cancelled |
/// | `_failures_total` | requests that failed |
/// | `_unstored_responses_total` | originals and variants served unstored: the store failed to write them |
struct PipelineMetrics: Sendable {
    let memoryHits: Counter
    let diskHits: Counter
    let revalidatedHits: Counter
    let networkResponses: Counter
    let staleResponses: Counter
    let revalidations: Counter
    let notModified: Counter
    let fetches: Counter
    let bytesFetched: Counter
    let coalescedWaiters: Counter
    let variantsMade: Counter
    let cancellations: Counter
    let failures: Counter
    let unstoredResponses: Counter

    init(prefix: String, factory: (any MetricsFactory)?) {
        let factory = factory ?? MetricsSystem.factory
        func counter(_ name: String, _ dimensions: [(String, String)] = []) -> Counter {
            Counter(label: "\(prefix)_\(name)_total", dimensions: dimensions, factory: factory)
        }
        func responses(_ source: String) -> Counter {
            counter("responses", [("source", source)])
        }
        memoryHits = responses("memory")
        diskHits = responses("disk")
        revalidatedHits = responses("revalidated")
        networkResponses = responses("network")
        staleResponses = responses("stale")
        revalidations = counter("revalidations")
        notModified = counter("not_modified")
        fetches = counter("fetches")
        bytesFetched = counter("fetched_bytes")
        coalescedWaiters = counter("coalesced_waiters")
        variantsMade = counter("variants_made")
        cancellations = counter("cancellations")
        failures = counter("failures")
        unstoredResponses = counter("unstored_responses")
    }
}
