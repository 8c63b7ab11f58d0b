// A model of the location map's churn at its limit (Docs/Benchmarks.md, "a location map at its
// limit slows down with churn"): a Swift Dictionary of 100 000 string keys takes new keys one by
// one, and whenever it is over the limit, keys are removed down to a sixteenth under it, chosen
// as `LocationMap.committed` chooses them (`front`: the first in iteration order, i.e. the hash
// table's bucket order), from a random starting point (`random`), every k-th over the whole
// table (`stride`), or the oldest keys first, in an order kept beside the table (`fifo`: what the
// map does since 2026-11-29, § the location map evicts its oldest slots). Prints the time of each
// 100 000 inserts.
//
//   swiftc -O scripts/location-map-churn.swift -o /tmp/churn && /tmp/churn front
import Foundation

setbuf(stdout, nil)
let limit = 100_000
let target = limit - limit / 16
let mode = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "front"
var slots: [String: Int] = [:]
/// `fifo`: keys in the order they came in, oldest first (`fifoHead` is the next to go).
var fifo: [String] = []
var fifoHead = 0
var random = SystemRandomNumberGenerator()
let clock = ContinuousClock()
var started = clock.now
for i in 0..<1_500_000 {
    slots["https://example.com/fill-\(i)"] = i
    if mode == "fifo" { fifo.append("https://example.com/fill-\(i)") }
    if slots.count > limit {
        let wanted = slots.count - target
        var victims: [String] = []
        victims.reserveCapacity(wanted)
        switch mode {
        case "random":
            var at = slots.index(slots.startIndex, offsetBy: Int.random(in: 0..<slots.count, using: &random))
            while victims.count < wanted {
                if at == slots.endIndex { at = slots.startIndex }
                victims.append(slots[at].key)
                at = slots.index(after: at)
            }
        case "fifo":
            // An order of their own: the oldest keys go, wherever they hash.
            while victims.count < wanted {
                victims.append(fifo[fifoHead])
                fifoHead += 1
            }
            if fifoHead > limit {
                fifo.removeFirst(fifoHead)
                fifoHead = 0
            }
        case "stride":
            let stride = max(1, slots.count / wanted)
            for (n, key) in slots.keys.enumerated() where n % stride == 0 {
                victims.append(key)
                if victims.count == wanted { break }
            }
        default:
            for key in slots.keys {
                victims.append(key)
                if victims.count == wanted { break }
            }
        }
        for key in victims { slots.removeValue(forKey: key) }
    }
    if i % 100_000 == 99_999 {
        let now = clock.now
        print("\(i + 1) inserts: the last 100 000 took \(now - started)")
        started = now
    }
}
