import Testing
import TroveCore
import TroveTestSupport

/// The two builds of XXH3 in CXXHash (baseline and AVX2) against reference values computed with
/// Debian's libxxhash.so 0.8.1, and against each other.
@Suite struct XXH3Tests {
    /// Input byte `i` of the reference vectors (the same generator fed libxxhash).
    static func referenceInput(count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ ($0 >> 7)) }
    }

    /// (length, XXH3-64, XXH3-64 seeded with 0x9E3779B97F4A7C15, XXH3-128 high, XXH3-128 low):
    /// every length class of XXH3 (0, 1–3, 4–8, 9–16, 17–128, 129–240, long) and its edges.
    static let vectors: [(Int, UInt64, UInt64, UInt64, UInt64)] = [
        (0, 0x2D06_8005_38D3_94C2, 0x602B_0E2C_D666_2C8B, 0x99AA_06D3_0147_98D8, 0x6001_C324_468D_497F),
        (1, 0xC44B_DFF4_074E_ECDB, 0x062B_185E_4E01_441A, 0xA6CD_5E93_9200_0F6A, 0xC44B_DFF4_074E_ECDB),
        (3, 0x6811_538B_444F_C6DC, 0xF4A7_95D2_019D_121A, 0xC925_AE17_97C3_998F, 0x6811_538B_444F_C6DC),
        (4, 0xED50_3340_C589_A28B, 0xF5AE_E1C9_88BF_33E7, 0x6AE5_18C6_0DF2_3FCA, 0xDB9C_ECD5_EB59_A7F1),
        (8, 0xE5B4_3AB0_74C9_C13B, 0xA1C0_D07A_E3B3_CAD9, 0x63F3_50EF_C0BA_3E2E, 0x5B3F_49D0_F38F_9D7D),
        (9, 0x089B_8D25_B20F_B877, 0x4747_18B6_A471_D8B0, 0x83C8_71B1_014E_6F76, 0xD8A2_0B5B_7AA6_8A37),
        (16, 0x0A0E_C5AE_8679_CB7F, 0x95D3_32B0_C469_6F0C, 0x2481_8130_5D3C_1039, 0xADEB_B1D9_D080_B69C),
        (17, 0x57C5_2D21_CE49_2C1E, 0x7F95_C4DD_352A_DA88, 0x825A_0DB7_D0AF_E2C0, 0xCFEA_252F_6B7E_D7E9),
        (128, 0x6960_69C4_F1E6_A91A, 0x4ECD_FD29_4E83_6728, 0x08DF_79F5_2037_0B52, 0x5CFE_A347_EA4B_B687),
        (129, 0x34DF_C256_C905_65F6, 0x768E_8C6C_F04B_F2C6, 0xBFF3_391F_3AE7_2593, 0x75F3_EF9C_8CC6_BF42),
        (240, 0xC92D_1E75_D8E9_B86A, 0x056B_FEC4_B5E5_00D8, 0x89B1_05A2_BC13_B00D, 0x66F2_1C52_F32E_742F),
        (241, 0x8EC3_2330_9081_B1D1, 0xDB9A_A089_871B_DE9A, 0x5239_DA43_672A_B6FD, 0x8EC3_2330_9081_B1D1),
        (1024, 0x0768_CBF9_9558_CBDA, 0xF391_07F9_3323_5917, 0xECAC_D3F1_D5ED_B361, 0x0768_CBF9_9558_CBDA),
        (1025, 0x7218_2781_B24C_CA49, 0x60BE_6234_C3FA_28FB, 0xE9E5_7B4A_31CF_78CA, 0x7218_2781_B24C_CA49),
        (65536, 0xACA5_9BEF_D8DD_DA81, 0x750A_04ED_7525_A393, 0x7BD2_4DBE_283E_71D5, 0xACA5_9BEF_D8DD_DA81),
        (1_048_583, 0x3C60_4971_B9B5_EEE7, 0x5809_A89A_29F6_40E6, 0x11A9_ED0E_7269_06F9, 0x3C60_4971_B9B5_EEE7),
    ]
    static let seed: UInt64 = 0x9E37_79B9_7F4A_7C15

    @Test func everyBuildGivesTheReferenceValues() {
        let input = Self.referenceInput(count: 1_048_583)
        input.withUnsafeBytes { all in
            for (length, plain, seeded, high, low) in Self.vectors {
                let bytes = UnsafeRawBufferPointer(rebasing: all[0..<length])
                for build in XXH3.supportedBuilds {
                    #expect(XXH3.hash64(bytes, build: build) == plain, "\(build) \(length)")
                    #expect(XXH3.hash64(bytes, seed: Self.seed, build: build) == seeded, "\(build) \(length)")
                    #expect(XXH3.hash128(bytes, build: build) == ContentHash(high: high, low: low), "\(build) \(length)")
                }
                // And the entry points the store uses.
                #expect(XXH3.hash64(bytes) == plain)
                #expect(XXH3.hash64(bytes, seed: Self.seed) == seeded)
                #expect(XXH3.hash128(bytes) == ContentHash(high: high, low: low))
            }
        }
    }

    @Test(.enabled(if: XXH3.supportedBuilds.contains(.avx2), "needs a CPU with AVX2"))
    func theBuildsAgreeOnEveryLengthAlignmentAndSplit() {
        let input = testBytes(seed: 3, count: 300_000)
        var generator = SeededGenerator(seed: 9)
        var lengths = Array(0...2_100)
        for _ in 0..<200 { lengths.append(Int.random(in: 2_100..<299_000, using: &generator)) }
        input.withUnsafeBytes { all in
            for length in lengths {
                let start = length % 8  // unaligned starts too
                let bytes = UnsafeRawBufferPointer(rebasing: all[start..<start + length])
                let seed = generator.next()
                #expect(
                    XXH3.hash64(bytes, seed: seed, build: .avx2) == XXH3.hash64(bytes, seed: seed, build: .baseline), "\(length)")
                #expect(XXH3.hash128(bytes, build: .avx2) == XXH3.hash128(bytes, build: .baseline), "\(length)")
                // Streamed in three parts, split at random points.
                let cuts = [Int.random(in: 0...length, using: &generator), Int.random(in: 0...length, using: &generator)].sorted()
                let parts = [bytes[0..<cuts[0]], bytes[cuts[0]..<cuts[1]], bytes[cuts[1]..<length]].map {
                    UnsafeRawBufferPointer(rebasing: $0)
                }
                let avx2 = XXH3.hash64(parts: parts, seed: seed, build: .avx2)
                #expect(avx2 == XXH3.hash64(parts: parts, seed: seed, build: .baseline), "\(length) split at \(cuts)")
                #expect(avx2 == XXH3.hash64(bytes, seed: seed, build: .baseline), "\(length) split at \(cuts)")
            }
        }
    }

    @Test func theFastestSupportedBuildIsUsed() {
        #expect(XXH3.build == XXH3.supportedBuilds.last)
    }

    @Test func streamingGivesTheOneShotHashForAnySplit() {
        let input = Self.referenceInput(count: 300_000)
        var generator = SeededGenerator(seed: 9)
        input.withUnsafeBytes { all in
            for _ in 0..<200 {
                let length = Int.random(in: 0...all.count, using: &generator)
                let seed = UInt64.random(in: 0...UInt64.max, using: &generator)
                var stream = XXH3.Stream64(seed: seed)
                var position = 0
                while position < length {
                    let step = min(length - position, Int.random(in: 0...70_000, using: &generator))
                    stream.update(UnsafeRawBufferPointer(rebasing: all[position..<position + step]))
                    position += step
                }
                #expect(stream.digest() == XXH3.hash64(UnsafeRawBufferPointer(rebasing: all[0..<length]), seed: seed))
            }
        }
    }
}
