/// Places by entry row id (``EntryDigestTable``'s), kept in pages of 64 consecutive ids.
///
/// Row ids are given in write order (one above the largest), so the places of a burst of puts
/// fill one page after another: a page holds its places in id order, packed, with a bit a
/// present id. A dense page costs ~41 bytes a place; a page that removals thinned out at most
/// ~140 (its dictionary bucket, its array's header and at most twice its places' room), about
/// what a hash table of places by id costs for every place. The dictionary of pages holds a 64th
/// of the keys a dictionary of places would, so its growth — a rehash of every key, under the
/// digest table's lock — copies a 64th as much; a page grows by at most 64 places.
struct PlaceTable {
    private struct Page {
        /// Bit `i`: id `page × 64 + i` has a place.
        var present: UInt64 = 0
        /// The places of the present ids, in id order.
        var places: [EntryPlace] = []

        /// Where the place of bit `bit` is (or goes) in `places`.
        func position(_ bit: UInt64) -> Int { (present & ((1 << bit) &- 1)).nonzeroBitCount }
    }

    private var pages: [Int64: Page] = [:]
    /// The number of places held.
    private(set) var count = 0

    /// The page of `id` and its bit in that page (any id, negative included).
    private static func locate(_ id: Int64) -> (page: Int64, bit: UInt64) {
        (id >> 6, UInt64(bitPattern: id) & 63)
    }

    /// The place of row `id`, if it has one.
    subscript(id: Int64) -> EntryPlace? {
        let (key, bit) = Self.locate(id)
        guard let page = pages[key], page.present & (1 << bit) != 0 else { return nil }
        return page.places[page.position(bit)]
    }

    /// Whether row `id` has a place.
    func contains(_ id: Int64) -> Bool {
        let (key, bit) = Self.locate(id)
        return (pages[key]?.present ?? 0) & (1 << bit) != 0
    }

    /// Sets (or replaces) the place of row `id`.
    mutating func set(_ place: EntryPlace, for id: Int64) {
        let (key, bit) = Self.locate(id)
        let added = modify(page: key) { page in
            let position = page.position(bit)
            if page.present & (1 << bit) != 0 {
                page.places[position] = place
                return false
            }
            page.present |= 1 << bit
            page.places.insert(place, at: position)
            return true
        }
        if added { count += 1 }
    }

    /// Removes the place of row `id`; whether it had one.
    @discardableResult
    mutating func remove(_ id: Int64) -> Bool {
        let (key, bit) = Self.locate(id)
        guard contains(id) else { return false }
        let emptied = modify(page: key) { page in
            page.places.remove(at: page.position(bit))
            page.present &= ~(1 << bit)
            // An array keeps its capacity as it empties (a page once full holds 2.5 KB): one
            // that removals leave under half used is refitted, and so is one left with a single
            // place. Under half, not at half: an array grown by one insert (doubled) and then
            // losing that place again is not refitted, so a place coming and going at that edge
            // does not copy the page each time.
            let (count, capacity) = (page.places.count, page.places.capacity)
            if count * 2 < capacity || (count == 1 && capacity > 1) {
                var fitted: [EntryPlace] = []
                fitted.reserveCapacity(page.places.count)
                fitted.append(contentsOf: page.places)
                page.places = fitted
            }
            return page.present == 0
        }
        if emptied { pages.removeValue(forKey: key) }
        count -= 1
        return true
    }

    /// Raises the read time of row `id`'s place, if it has one, to `time`.
    mutating func raiseReadTime(of id: Int64, to time: Int64) {
        let (key, bit) = Self.locate(id)
        guard contains(id) else { return }
        modify(page: key) { page in
            let position = page.position(bit)
            if page.places[position].accessedAt < time { page.places[position].accessedAt = time }
        }
    }

    /// The number of pages held (tests check that emptied pages go).
    var pageCount: Int { pages.count }

    /// Bytes of the pages' dictionary buckets and of their arrays (for the memory budget).
    var byteCount: Int {
        // A Swift dictionary's capacity is three quarters of its power-of-two bucket count (an
        // outside review found the count taken twice over before); an array's storage has a
        // 32-byte header.
        var buckets = 0
        if pages.capacity > 0 {
            buckets = 1
            while buckets * 3 / 4 < pages.capacity { buckets <<= 1 }
        }
        let arrays = pages.values.reduce(0) { $0 + 32 + $1.places.capacity * MemoryLayout<EntryPlace>.stride }
        return buckets * (MemoryLayout<Int64>.stride + MemoryLayout<Page>.stride) + arrays
    }

    /// Runs `body` on page `key` in place (made empty if absent).
    @discardableResult
    private mutating func modify<T>(page key: Int64, _ body: (inout Page) -> T) -> T {
        body(&pages[key, default: Page()])
    }
}
