// TroveOrigin: a loopback origin (being built).
