public import Foundation
public import TroveCodec
public import TroveCore

/// Originals and their downsampled WebP variants, in a ``Store``.
///
/// An original is stored under `CacheKey(url:)`; a variant under `CacheKey(url:, variant:
/// variant.description)`. A variant is made on demand from the stored original — decoded with
/// shrink-on-load, oriented, resampled, encoded (Docs/Codecs.md) — and stored, so the next
/// request is a read. Storing an original whose bytes changed removes its old variants.
///
/// ```swift
/// let images = ImageCache(store: store)
/// try images.storeOriginal(jpeg, for: "https://example.com/a.jpg")
/// let thumb = try images.variant(Variant(width: 256, height: 256), for: "https://example.com/a.jpg")
/// ```
public final class ImageCache: Sendable {
    /// The store holding originals and variants.
    public let store: Store
    /// The limits every decode is checked against.
    public let limits: DecodeLimits

    /// Makes a cache over `store`.
    public init(store: Store, limits: DecodeLimits = DecodeLimits()) {
        self.store = store
        self.limits = limits
    }

    /// Stores `data` as the original of `url`. If a different original was stored, its
    /// variants are removed first (they were made from other bytes).
    ///
    /// - Throws: ``CodecError`` when `data` is not an image Trove can decode (checked from its
    ///   header, so nothing undecodable is cached); ``StoreError``.
    public func storeOriginal(_ data: Data, for url: String, metadata: EntryMetadata = EntryMetadata()) throws {
        let bytes = [UInt8](data)
        guard ImageFormat.sniff(bytes) != nil else { throw CodecError(.unknownFormat, "\(url): not JPEG, PNG or WebP") }
        let key = CacheKey(url: url)
        let hash = ContentHash(hashing: bytes)
        if let old = try store.info(for: key), old.contentHash != hash {
            try store.removeAll(url: url)
        }
        try store.put(data, for: key, metadata: metadata)
    }

    /// The original of `url`, if stored.
    public func original(for url: String) throws -> Entry? {
        try store.entry(for: CacheKey(url: url))
    }

    /// `variant` of `url`'s original: the stored variant if there is one, else made from the
    /// stored original and stored (with the original's metadata). nil when no original is stored.
    ///
    /// - Throws: ``CodecError`` when the original cannot be decoded (it is kept; the variant is
    ///   not stored), ``StoreError``.
    public func variant(_ variant: Variant, for url: String) throws -> Entry? {
        let key = CacheKey(url: url, variant: variant.description)
        if let stored = try store.entry(for: key) { return stored }
        guard let original = try store.entry(for: CacheKey(url: url)) else { return nil }
        let thumbnail = try ImageDecoder.thumbnail([UInt8](original.data), variant: variant, limits: limits)
        try store.put(Data(thumbnail.data), for: key, metadata: original.info.metadata)
        return try store.entry(for: key)
    }

    /// The variants of `url` that are stored, by their text.
    public func variants(for url: String) throws -> [Variant] {
        try store.entries(url: url).compactMap { Variant(parsing: $0.key.variant) }
    }

    /// Removes `url`'s original and every variant. Returns how many entries went.
    @discardableResult
    public func removeAll(url: String) throws -> Int {
        try store.removeAll(url: url)
    }
}
