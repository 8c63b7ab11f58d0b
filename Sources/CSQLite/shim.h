#ifndef TROVE_CSQLITE_SHIM_H
#define TROVE_CSQLITE_SHIM_H
#include <sqlite3.h>

// SQLITE_TRANSIENT is a cast macro, which Swift does not import.
static inline sqlite3_destructor_type CSQLite_transient(void) { return SQLITE_TRANSIENT; }
// SQLITE_STATIC likewise: SQLite uses the caller's bytes as they are, without a copy.
static inline sqlite3_destructor_type CSQLite_static(void) { return SQLITE_STATIC; }

#endif
