/// Runs a fetch against a deadline and the caller's cancellation.
///
/// AsyncHTTPClient's own deadline covers a request until its response head; the body is
/// streamed afterwards. So the whole-request timeout is enforced here: the fetch runs as a child
/// task next to a timer, the first to finish decides, and the other is cancelled (which cancels
/// the HTTP request and closes its connection). The caller's cancellation cancels both children;
/// the fetch then ends with `cancelled` as soon as it notices, which for a request in flight is
/// the next event-loop turn.
enum RequestDeadline {
    static func run<Value: Sendable>(
        until deadline: ContinuousClock.Instant, url: String, timeout: Duration,
        _ operation: @escaping @Sendable () async -> Result<Value, OriginError>
    ) async -> Result<Value, OriginError> {
        let outcome = await withTaskGroup(of: Result<Value, OriginError>?.self) { group in
            group.addTask { await operation() }
            group.addTask {
                do {
                    try await Task.sleep(until: deadline, clock: .continuous)
                } catch {
                    return nil  // cancelled: the operation reports the cancellation itself
                }
                return .failure(
                    OriginError(
                        code: .timeout,
                        message: "fetching \(url) took longer than the request timeout (\(timeout)); "
                            + "the origin is slow or stalled — try again later or raise OriginLimits.requestTimeout",
                        url: url))
            }
            var first: Result<Value, OriginError>?
            while first == nil, let next = await group.next() {
                first = next
            }
            group.cancelAll()
            return first ?? .failure(.cancelled(url))
        }
        // A failure of a cancelled caller is reported as the cancellation it is.
        if case .failure(let error) = outcome, Task.isCancelled, error.code != .cancelled {
            return .failure(.cancelled(url))
        }
        return outcome
    }
}
