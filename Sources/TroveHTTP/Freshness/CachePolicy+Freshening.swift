// CachePolicy+Freshening: a 304 Not Modified refreshes a stored response (RFC 9111 §4.3.4).
// See Docs/Freshness.md.

public import Foundation

extension CachePolicy {
    /// The stored response's freshness after a 304 (Not Modified) revalidated it (RFC 9111
    /// §4.3.4); nil when the 304 does not identify the stored response, which then must not be
    /// updated: fetch it again without conditions.
    ///
    /// The 304's header fields replace the stored fields of the same name (§3.2), one field at a
    /// time: its `Cache-Control` replaces the stored directives as a whole (the stored ones stay
    /// when it has none), its `Expires` the stored `Expires`, its `ETag` and `Last-Modified` the
    /// stored validators. Freshness is then computed anew, as for a response received at
    /// `responseTime` and requested at `requestTime`:
    /// - the age is the 304's own: its `Date` (the receipt time when it has none, as RFC 9110
    ///   §6.6.1 has a recipient add), its `Age` (none when it has none: `Age` counts from the
    ///   last validation at the origin, RFC 9111 §5.1) and the revalidation's round trip; the
    ///   stored `Date` and `Age` describe an older message and are not carried over;
    /// - the lifetime comes from the merged `max-age`, `Expires` or `Last-Modified` heuristic.
    ///
    /// The result's ``ResponseFreshness/isStorable`` is false when the 304 brought `no-store`
    /// or `Vary: *`: serve the stored bytes this once, then remove the entry.
    ///
    /// - Parameters:
    ///   - headers: The 304's header fields.
    ///   - storedValidators: The stored response's validators (``Validators/areIdentified(byNotModified:now:)``
    ///     decides whether the 304 is for it).
    ///   - requestTime: When the conditional request was sent.
    ///   - responseTime: When the 304 was received.
    ///   - settings: The cache's heuristic settings.
    /// - Returns: The refreshed freshness, whose ``ResponseFreshness/policy`` and
    ///   ``ResponseFreshness/validators`` replace the stored ones; nil when the 304 names
    ///   another response.
    public func freshened(
        byNotModified headers: some Sequence<(name: String, value: String)>, storedValidators: Validators,
        requestTime: Date, responseTime: Date, settings: FreshnessSettings = FreshnessSettings()
    ) -> ResponseFreshness? {
        let fields = HeaderFields(headers)
        let notModified = fields.validators
        guard storedValidators.areIdentified(byNotModified: notModified, now: responseTime) else { return nil }
        let cacheControl = fields.parsedCacheControl ?? directives
        let expires = fields.expires.isEmpty ? self.expires : fields.parsedExpires(now: responseTime)
        let lastModified =
            fields.lastModified.isEmpty ? lastModifiedMilliseconds : fields.parsedLastModified(now: responseTime)
        // The stored response was a 200 or 203; both allow the same things here.
        return ResponseFreshness(
            status: 200, cacheControl: cacheControl, expires: expires, dateMilliseconds: fields.parsedDate(now: responseTime),
            ageMilliseconds: fields.parsedAge, lastModifiedMilliseconds: lastModified, varyListsAny: fields.varyListsAny,
            validators: storedValidators.updated(byNotModified: notModified), requestTime: requestTime,
            responseTime: responseTime, settings: settings)
    }
}
