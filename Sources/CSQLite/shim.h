// What Swift cannot take from sqlite3.h directly: SQLITE_TRANSIENT is a macro casting -1 to a
// destructor (SQLite copies the bytes it is given).
#ifndef TONEARM_CSQLITE_SHIM_H
#define TONEARM_CSQLITE_SHIM_H
#include <sqlite3.h>

static inline sqlite3_destructor_type tonearm_sqlite_transient(void) { return SQLITE_TRANSIENT; }
#endif
