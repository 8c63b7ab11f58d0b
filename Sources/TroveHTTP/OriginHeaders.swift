/// The header fields of an origin's response (or the extra fields of a request): name/value
/// pairs in the order they came, names compared case-insensitively (RFC 9110 §5.1), a name
/// possibly repeated.
///
/// It is a collection of `(name: String, value: String)`, so the freshness rules
/// (``ResponseFreshness``) read it as is.
///
/// ```swift
/// let headers: OriginHeaders = [("Cache-Control", "max-age=60"), ("cache-control", "no-transform")]
/// headers["ETag"]                                  // nil
/// headers.values(for: "CACHE-CONTROL")             // ["max-age=60", "no-transform"]
/// headers.combinedValue(for: "Cache-Control")      // "max-age=60, no-transform"
/// ```
public struct OriginHeaders: RandomAccessCollection, Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
    public typealias Element = (name: String, value: String)

    private var fields: [Element]

    /// Makes an empty list.
    public init() { fields = [] }

    /// Makes a list of `fields`, in their order.
    public init(_ fields: some Sequence<(name: String, value: String)>) {
        self.fields = Array(fields)
    }

    /// Makes a list of the literal's fields, in their order.
    public init(arrayLiteral elements: (String, String)...) {
        fields = elements.map { (name: $0.0, value: $0.1) }
    }

    public var startIndex: Int { fields.startIndex }
    public var endIndex: Int { fields.endIndex }
    public subscript(position: Int) -> Element { fields[position] }

    /// The value of the first field named `name` (case-insensitive); nil when there is none.
    public subscript(name: String) -> String? {
        fields.first { Self.namesMatch($0.name, name) }?.value
    }

    /// The values of every field named `name`, in order.
    public func values(for name: String) -> [String] {
        fields.filter { Self.namesMatch($0.name, name) }.map(\.value)
    }

    /// The values of every field named `name` joined with `", "`, as RFC 9110 §5.3 combines the
    /// lines of a list-based field; nil when there is none.
    public func combinedValue(for name: String) -> String? {
        let values = values(for: name)
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    /// Whether a field named `name` is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { Self.namesMatch($0.name, name) }
    }

    /// Appends a field (a name may repeat).
    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    /// Removes every field named `name`, then appends one with `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        remove(name: name)
        add(name: name, value: value)
    }

    /// Removes every field named `name`.
    public mutating func remove(name: String) {
        fields.removeAll { Self.namesMatch($0.name, name) }
    }

    public var description: String {
        fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    /// ASCII case-insensitive equality (field names are tokens: ASCII only).
    static func namesMatch(_ a: String, _ b: String) -> Bool {
        func lowered(_ byte: UInt8) -> UInt8 {
            byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
        }
        return a.utf8.count == b.utf8.count && zip(a.utf8, b.utf8).allSatisfy { lowered($0) == lowered($1) }
    }
}
