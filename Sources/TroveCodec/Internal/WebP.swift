import CWebP

/// WebP decoding (with scaling) and encoding through libwebp.
enum WebP {
    static func status(_ s: VP8StatusCode, _ what: String) -> CodecError {
        switch s {
        case VP8_STATUS_NOT_ENOUGH_DATA: return CodecError(.truncated, "WebP \(what): not enough data")
        case VP8_STATUS_UNSUPPORTED_FEATURE: return CodecError(.unsupported, "WebP \(what): unsupported feature")
        default: return CodecError(.corrupt, "WebP \(what): status \(s.rawValue)")
        }
    }

    /// The header's dimensions and whether the image has alpha.
    static func features(_ data: UnsafeRawBufferPointer) throws(CodecError) -> (width: Int, height: Int, hasAlpha: Bool) {
        var features = WebPBitstreamFeatures()
        let s = WebPGetFeatures(data.baseAddress?.assumingMemoryBound(to: UInt8.self), data.count, &features)
        guard s == VP8_STATUS_OK else { throw status(s, "header") }
        return (Int(features.width), Int(features.height), features.has_alpha != 0)
    }

    /// Decodes to RGBA, scaled by libwebp to `size` when given.
    static func decode(_ data: UnsafeRawBufferPointer, size: (Int, Int)?) throws(CodecError) -> RGBAImage {
        let header = try features(data)
        var config = WebPDecoderConfig()
        guard WebPInitDecoderConfig(&config) != 0 else { throw CodecError(.unsupported, "WebP: decoder ABI mismatch") }
        let (width, height) = size ?? (header.width, header.height)
        if size != nil {
            config.options.use_scaling = 1
            config.options.scaled_width = Int32(width)
            config.options.scaled_height = Int32(height)
        }
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        let s = pixels.withUnsafeMutableBufferPointer { out -> VP8StatusCode in
            config.output.colorspace = MODE_RGBA
            config.output.is_external_memory = 1
            config.output.u.RGBA.rgba = out.baseAddress
            config.output.u.RGBA.stride = Int32(width * 4)
            config.output.u.RGBA.size = out.count
            defer { WebPFreeDecBuffer(&config.output) }
            return WebPDecode(data.baseAddress?.assumingMemoryBound(to: UInt8.self), data.count, &config)
        }
        guard s == VP8_STATUS_OK else { throw status(s, "data") }
        return RGBAImage(width: width, height: height, pixels: pixels)
    }

    /// Encodes RGBA as WebP: lossy at `quality` (0–100) keeping alpha, or lossless.
    static func encode(_ image: RGBAImage, quality: Int, lossless: Bool) throws(CodecError) -> [UInt8] {
        var config = WebPConfig()
        guard WebPConfigInit(&config) != 0 else { throw CodecError(.encodeFailed, "WebP: encoder ABI mismatch") }
        config.quality = Float(max(0, min(100, quality)))
        config.lossless = lossless ? 1 : 0
        config.method = 4
        var picture = WebPPicture()
        guard WebPPictureInit(&picture) != 0 else { throw CodecError(.encodeFailed, "WebP: picture ABI mismatch") }
        picture.width = Int32(image.width)
        picture.height = Int32(image.height)
        picture.use_argb = 1
        defer { WebPPictureFree(&picture) }
        let imported = image.pixels.withUnsafeBufferPointer {
            WebPPictureImportRGBA(&picture, $0.baseAddress, Int32(image.width * 4))
        }
        guard imported != 0 else { throw CodecError(.encodeFailed, "WebP: out of memory importing the picture") }
        var writer = WebPMemoryWriter()
        WebPMemoryWriterInit(&writer)
        defer { WebPMemoryWriterClear(&writer) }
        let ok = withUnsafeMutablePointer(to: &writer) { w -> Int32 in
            picture.writer = WebPMemoryWrite
            picture.custom_ptr = UnsafeMutableRawPointer(w)
            return WebPEncode(&config, &picture)
        }
        guard ok != 0, let memory = writer.mem else {
            throw CodecError(.encodeFailed, "WebP: encoding failed (error \(picture.error_code.rawValue))")
        }
        return Array(UnsafeBufferPointer(start: memory, count: writer.size))
    }
}
