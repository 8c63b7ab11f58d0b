public import TroveCodec
public import TroveHTTP
public import TroveStore

/// Why ``ImagePipeline/image(for:variant:)`` gave no image.
///
/// The underlying error of the layer that failed is kept, typed: ``originError``,
/// ``storeError`` or ``codecError``. (A caller whose task is cancelled gets Swift's
/// `CancellationError` instead, at once.)
public struct PipelineError: Error, Sendable, CustomStringConvertible {
    /// The layer that failed.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String

        /// The origin could not be fetched or revalidated, and no stale copy was allowed to
        /// stand in: a status, timeout, limit, truncation, non-image body or transport error
        /// (``PipelineError/originError``).
        public static let origin = Code(name: "origin")
        /// The store failed (``PipelineError/storeError``).
        public static let store = Code(name: "store")
        /// The original could not be decoded, or the variant not encoded
        /// (``PipelineError/codecError``). The original stays stored; no variant is.
        public static let codec = Code(name: "codec")
        /// The pipeline was shut down.
        public static let shutDown = Code(name: "shutDown")

        public var description: String { name }
    }

    /// The layer that failed.
    public var code: Code
    /// What happened, naming the URL, and what to do.
    public var message: String
    /// The requested URL.
    public var url: String
    /// The error of the layer that failed.
    public var underlying: (any Error & Sendable)?

    /// Makes an error.
    public init(code: Code, message: String, url: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.url = url
        self.underlying = underlying
    }

    /// The origin's error, for ``Code/origin``.
    public var originError: OriginError? { underlying as? OriginError }
    /// The store's error, for ``Code/store``.
    public var storeError: StoreError? { underlying as? StoreError }
    /// The codec's error, for ``Code/codec``.
    public var codecError: CodecError? { underlying as? CodecError }

    public var description: String { message }

    static func origin(_ error: OriginError, url: String) -> PipelineError {
        PipelineError(code: .origin, message: error.message, url: url, underlying: error)
    }

    static func store(_ error: StoreError, url: String) -> PipelineError {
        PipelineError(code: .store, message: "\(url): \(error.message)", url: url, underlying: error)
    }

    static func shutDown(url: String) -> PipelineError {
        PipelineError(
            code: .shutDown, message: "\(url): the pipeline was shut down; make a new one to load images", url: url)
    }

    static func codec(_ error: CodecError, url: String) -> PipelineError {
        PipelineError(code: .codec, message: "\(url): \(error)", url: url, underlying: error)
    }
}
