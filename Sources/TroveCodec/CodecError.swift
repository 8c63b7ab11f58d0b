/// An error of the codec layer: input that cannot or must not be decoded, or an encoder failure.
///
/// Hostile input of any kind ends here, with a code that names the reason — never a crash,
/// never an allocation the limits did not allow.
public struct CodecError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The kind of a codec error. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The bytes are not JPEG, PNG or WebP.
        public static let unknownFormat = Code(name: "unknownFormat")
        /// The data ends before the image does.
        public static let truncated = Code(name: "truncated")
        /// The data is damaged or malformed.
        public static let corrupt = Code(name: "corrupt")
        /// A valid image of a kind Trove does not decode (CMYK JPEG, for one).
        public static let unsupported = Code(name: "unsupported")
        /// The header claims dimensions or a pixel count over the ``DecodeLimits``.
        public static let tooLarge = Code(name: "tooLarge")
        /// The encoder failed.
        public static let encodeFailed = Code(name: "encodeFailed")
        /// A codec library could not start or get memory: not the input's fault, and worth
        /// retrying.
        public static let libraryFailure = Code(name: "libraryFailure")
        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What is wrong, in words.
    public var message: String

    /// Makes an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
