import CSPNG

#if canImport(Glibc)
    import Glibc
#endif

/// PNG decoding and encoding through libspng; each call owns its context.
enum SPNG {
    static func message(_ code: Int32) -> String { String(cString: spng_strerror(code)) }

    static func error(_ code: Int32, _ what: String) -> CodecError {
        let text = message(code)
        // libspng says truncation by its codes, never only in words: the buffer ran out
        // (SPNG_IO_EOF), the file ended (SPNG_EOF), or the image data stopped short.
        let truncated = [SPNG_IO_EOF.rawValue, SPNG_EOF.rawValue, SPNG_EIDAT_TOO_SHORT.rawValue].contains { Int32($0) == code }
        return CodecError(truncated ? .truncated : .corrupt, "PNG \(what): \(text)")
    }

    /// The image's header dimensions.
    static func dimensions(_ data: UnsafeRawBufferPointer) throws(CodecError) -> (Int, Int) {
        guard let ctx = spng_ctx_new(0) else { throw CodecError(.libraryFailure, "PNG: libspng could not make a context") }
        defer { spng_ctx_free(ctx) }
        spng_set_png_buffer(ctx, data.baseAddress, data.count)
        var ihdr = spng_ihdr()
        let rc = spng_get_ihdr(ctx, &ihdr)
        guard rc == 0 else { throw error(rc, "header") }
        return (Int(ihdr.width), Int(ihdr.height))
    }

    /// Decodes to RGBA8 (16-bit, palette, grey and transparency converted), after checking the
    /// header against `limits`.
    static func decode(_ data: UnsafeRawBufferPointer, limits: DecodeLimits) throws(CodecError) -> RGBAImage {
        guard let ctx = spng_ctx_new(0) else { throw CodecError(.libraryFailure, "PNG: libspng could not make a context") }
        defer { spng_ctx_free(ctx) }
        // libspng's own bounds: image size and ancillary chunk memory.
        spng_set_image_limits(ctx, UInt32(limits.maxDimension), UInt32(limits.maxDimension))
        spng_set_chunk_limits(ctx, 4 << 20, 16 << 20)
        spng_set_png_buffer(ctx, data.baseAddress, data.count)
        var ihdr = spng_ihdr()
        var rc = spng_get_ihdr(ctx, &ihdr)
        guard rc == 0 else {
            if rc == Int32(SPNG_EWIDTH.rawValue) || rc == Int32(SPNG_EHEIGHT.rawValue) || rc == Int32(SPNG_EUSER_WIDTH.rawValue)
                || rc == Int32(SPNG_EUSER_HEIGHT.rawValue)
            {
                throw CodecError(.tooLarge, "PNG header: \(message(rc))")
            }
            throw error(rc, "header")
        }
        try limits.check(width: Int(ihdr.width), height: Int(ihdr.height))
        var size = 0
        rc = spng_decoded_image_size(ctx, Int32(SPNG_FMT_RGBA8.rawValue), &size)
        guard rc == 0, size == Int(ihdr.width) * Int(ihdr.height) * 4 else { throw error(rc, "size") }
        var pixels = [UInt8](repeating: 0, count: size)
        rc = pixels.withUnsafeMutableBytes {
            spng_decode_image(ctx, $0.baseAddress, size, Int32(SPNG_FMT_RGBA8.rawValue), Int32(SPNG_DECODE_TRNS.rawValue))
        }
        guard rc == 0 else { throw error(rc, "data") }
        return RGBAImage(width: Int(ihdr.width), height: Int(ihdr.height), pixels: pixels)
    }

    /// Encodes `pixels`, laid out as the PNG colour type and bit depth say (big-endian for 16
    /// bits), optionally with a palette. For making test images and for tools.
    static func encode(
        width: Int, height: Int, colorType: UInt8, bitDepth: UInt8, pixels: [UInt8], palette: [(UInt8, UInt8, UInt8)] = [],
        interlaced: Bool = false
    ) throws(CodecError) -> [UInt8] {
        guard let ctx = spng_ctx_new(Int32(SPNG_CTX_ENCODER.rawValue)) else { throw CodecError(.encodeFailed, "PNG: no context") }
        defer { spng_ctx_free(ctx) }
        spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1)
        var ihdr = spng_ihdr(
            width: UInt32(width), height: UInt32(height), bit_depth: bitDepth, color_type: colorType, compression_method: 0,
            filter_method: 0, interlace_method: interlaced ? 1 : 0)
        var rc = spng_set_ihdr(ctx, &ihdr)
        guard rc == 0 else { throw CodecError(.encodeFailed, "PNG: \(message(rc))") }
        if !palette.isEmpty {
            var plte = spng_plte()
            plte.n_entries = UInt32(palette.count)
            withUnsafeMutableBytes(of: &plte.entries) { raw in
                let entries = raw.bindMemory(to: spng_plte_entry.self)
                for (i, c) in palette.enumerated() { entries[i] = spng_plte_entry(red: c.0, green: c.1, blue: c.2, alpha: 255) }
            }
            rc = spng_set_plte(ctx, &plte)
            guard rc == 0 else { throw CodecError(.encodeFailed, "PNG palette: \(message(rc))") }
        }
        rc = pixels.withUnsafeBytes {
            spng_encode_image(ctx, $0.baseAddress, $0.count, Int32(SPNG_FMT_PNG.rawValue), Int32(SPNG_ENCODE_FINALIZE.rawValue))
        }
        guard rc == 0 else { throw CodecError(.encodeFailed, "PNG: \(message(rc))") }
        var length = 0
        var err: Int32 = 0
        guard let buffer = spng_get_png_buffer(ctx, &length, &err) else {
            throw CodecError(.encodeFailed, "PNG: \(message(err))")
        }
        defer { free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }
}
