// TroveHTTP: origin fetching (being built).
