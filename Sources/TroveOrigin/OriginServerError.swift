/// An error of ``OriginServer``.
public struct OriginServerError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The server cannot listen on the address and port asked for.
        public static let bindFailed = Code(name: "bindFailed")
        /// The directory to serve does not exist or is not a directory.
        public static let invalidDirectory = Code(name: "invalidDirectory")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and what to do.
    public var message: String
    /// The lower-level error, if any.
    public var underlying: (any Error & Sendable)?

    /// Makes an error.
    public init(code: Code, message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }
}
