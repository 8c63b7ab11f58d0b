import ArgumentParser
import Foundation
import Trove
import TroveCore

extension TroveCommand {
    struct Fsck: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the store: every record, the index against the packs both ways, SQLite.",
            discussion: """
                Exit codes: 0 the store is clean; 1 problems were found and all repaired \
                (--repair); 3 the store is damaged (run again with --repair, or \
                --rebuild-index when the index itself is damaged); 2 the check could not run. \
                Docs/Operations.md says what each finding means.
                """)

        @OptionGroup var store: StoreOptions

        @Flag(help: "Fix what is found without losing any intact entry.")
        var repair = false

        @Flag(help: "Rebuild index.sqlite from the packs first (the old one is kept aside).")
        var rebuildIndex = false

        @Flag(help: "Print the report as JSON.")
        var json = false

        func run() throws {
            let line = ProgressLine()
            var rebuilt: FsckReport?
            if rebuildIndex {
                do {
                    rebuilt = try Store.rebuildIndex(directory: store.directory) { line.update($0) }
                    line.finish()
                } catch let error as StoreError {
                    try fail(error.message)
                } catch {
                    try fail("cannot rebuild the index: \(error)")
                }
            }
            let report = try store.withStore { store in
                try store.fsck(repair: repair) { line.update($0) }
            }
            line.finish()
            if json {
                try printJSON(report)
            } else {
                if let rebuilt {
                    printOut("rebuilt the index from \(rebuilt.segmentsChecked) segments")
                    for finding in rebuilt.findings {
                        printOut("\(finding.repaired ? "repaired" : "found   ")  \(finding.kind.rawValue): \(finding.message)")
                    }
                }
                printOut(
                    "checked \(report.segmentsChecked) segments, \(report.recordsVerified) records, "
                        + "\(ByteCount(report.bytesVerified)) verified")
                for finding in report.findings {
                    printOut("\(finding.repaired ? "repaired" : "found   ")  \(finding.kind.rawValue): \(finding.message)")
                }
                if report.entriesLost > 0 { printOut("\(report.entriesLost) entries had damaged bytes and are gone") }
                printOut(report.isClean ? "clean" : report.isRepaired ? "repaired" : "damaged")
            }
            if report.isClean && (rebuilt?.findings.isEmpty ?? true) { return }
            if report.isRepaired || report.isClean { throw ExitCode(1) }
            throw ExitCode(ExitCodes.damaged)
        }
    }
}
