/// Runs `body` on the bytes of `data`, keeping its typed error (`withUnsafeBytes` only rethrows).
func withBytes<T>(_ data: [UInt8], _ body: (UnsafeRawBufferPointer) throws(CodecError) -> T) throws(CodecError) -> T {
    let result = data.withUnsafeBytes { raw in Result { () throws(CodecError) -> T in try body(raw) } }
    return try result.get()
}
