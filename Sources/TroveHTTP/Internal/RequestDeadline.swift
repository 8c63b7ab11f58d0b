import NIOCore
import TroveCore

/// Runs a fetch against a deadline and the caller's cancellation.
///
/// AsyncHTTPClient's own deadline covers a request until its response head; the body is
/// streamed afterwards. So the whole-request timeout is enforced here: the fetch runs as a task
/// of its own, and a timer on an event loop cancels that task at the deadline (which cancels
/// the HTTP request and closes its connection); the fetch's `cancelled` (or the cut connection
/// or body that cancelling causes) is then reported as the timeout it is. The caller's cancellation cancels the task too. A fetch that ends first
/// cancels the timer, so nothing is left scheduled (a sleeping timer task would stay queued in
/// the dispatch timer heap until its deadline, one per request).
enum RequestDeadline {
    static func run<Value: Sendable>(
        until deadline: ContinuousClock.Instant, url: String, timeout: Duration, on eventLoop: any EventLoop,
        _ operation: @escaping @Sendable () async -> Result<Value, OriginError>
    ) async -> Result<Value, OriginError> {
        // The timer is scheduled before the fetch starts, so no fetch ever runs without it; a
        // timer that fires before the task is in place leaves it to be cancelled at once.
        let race = Locked<(timedOut: Bool, fetch: Task<Result<Value, OriginError>, Never>?)>((false, nil))
        let remaining = max(deadline - ContinuousClock.now, .zero)
        let timer = eventLoop.scheduleTask(in: TimeAmount(remaining)) {
            let fetch = race.withLock { race in
                race.timedOut = true
                return race.fetch
            }
            fetch?.cancel()
        }
        let fetch = Task { await operation() }
        let alreadyTimedOut = race.withLock { race in
            race.fetch = fetch
            return race.timedOut
        }
        if alreadyTimedOut { fetch.cancel() }
        let outcome = await withTaskCancellationHandler {
            await fetch.value
        } onCancel: {
            fetch.cancel()
        }
        timer.cancel()
        // A failure of a cancelled caller is reported as the cancellation it is.
        if Task.isCancelled {
            if case .failure(let error) = outcome, error.code != .cancelled { return .failure(.cancelled(url)) }
            return outcome
        }
        // After the timer fired, a failure that its cancellation can cause — the fetch
        // cancelled, its connection or body cut — is the timeout. A definite answer that came
        // first (a status, a body that is not an image, over the limit) stays what it is.
        if case .failure(let error) = outcome, race.withLock({ $0.timedOut }),
            [OriginError.Code.cancelled, .transport, .truncated].contains(error.code)
        {
            return .failure(
                OriginError(
                    code: .timeout,
                    message: "fetching \(url) took longer than the request timeout (\(timeout)); "
                        + "the origin is slow or stalled — try again later or raise OriginLimits.requestTimeout",
                    url: url))
        }
        return outcome
    }
}
