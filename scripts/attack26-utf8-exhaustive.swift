import Glibc
func newRead(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
    var text = String(decoding: bytes, as: UTF8.self)
    let valid = text.withUTF8 { utf8 in
        utf8.count == bytes.count && (bytes.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
    }
    return valid ? text : nil
}
var bad = 0
var buf = [UInt8](repeating: 0, count: 4)
// every 3-byte string
for a in 0...255 { for b in 0...255 { for c in 0...255 {
    buf[0] = UInt8(a); buf[1] = UInt8(b); buf[2] = UInt8(c)
    let r = buf.withUnsafeBufferPointer { newRead(UnsafeBufferPointer(rebasing: $0[0..<3])) }
    let e = String(validating: buf[0..<3], as: UTF8.self)
    if (r == nil) != (e == nil) || (r != nil && !Array(r!.utf8).elementsEqual(buf[0..<3])) { bad += 1; if bad < 5 { print(a,b,c) } }
}}}
print("3-byte mismatches:", bad)
// every 4-byte string with lead >= 0xC0 and next bytes >= 0x80 or ascii 0x41
var cont: [UInt8] = Array(0x80...0xBF) + [0x41, 0xC2, 0xE0, 0xF0, 0xFF]
for a in 0xC0...0xFF { for b in cont { for c in cont { for d in cont {
    buf[0] = UInt8(a); buf[1] = b; buf[2] = c; buf[3] = d
    let r = buf.withUnsafeBufferPointer { newRead($0) }
    let e = String(validating: buf, as: UTF8.self)
    if (r == nil) != (e == nil) || (r != nil && Array(r!.utf8) != buf) { bad += 1; if bad < 5 { print(a,b,c,d) } }
}}}}
print("total mismatches:", bad)
