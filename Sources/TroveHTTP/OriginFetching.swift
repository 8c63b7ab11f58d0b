/// Something that fetches an image original from where it lives: an HTTP(S) origin
/// (``HTTPOrigin``), a local file (``FileOrigin``), both by scheme (``OriginRouter``), or a
/// test double.
///
/// A conforming type returns a ``OriginResponse`` only for a complete `200 OK` — whose whole
/// body it received and checked against any declared length — or for a `304 Not Modified`
/// answering a conditional request. Everything else throws an ``OriginError``: a partial body
/// is never returned, so nothing partial can be stored. When the calling task is cancelled, the
/// fetch ends promptly with ``OriginError/Code/cancelled`` and releases what it held (for HTTP,
/// the connection is closed).
///
/// ```swift
/// let origin = OriginRouter(http: HTTPOrigin(), file: FileOrigin())
/// let response = try await origin.fetch(OriginRequest(url: url, validators: stored.validators))
/// if response.isNotModified {
///     // refresh the stored entry's freshness from response.headers
/// } else {
///     // store response.body under the requested URL
/// }
/// ```
public protocol OriginFetching: Sendable {
    /// Fetches `request.url`, conditionally when `request.validators` has any.
    ///
    /// - Returns: A 200 response with its whole body, or a 304 response without one.
    /// - Throws: ``OriginError``: for any other status, a timeout, a body over the size limit,
    ///   a truncated or mismatched body, a body that is not an image when one is required, a
    ///   cancellation, an invalid URL, or a transport failure.
    func fetch(_ request: OriginRequest) async throws(OriginError) -> OriginResponse
}
