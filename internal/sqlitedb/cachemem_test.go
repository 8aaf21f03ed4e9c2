package sqlitedb

import (
	"bufio"
	"crypto/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkCacheRSS measures what a full page cache costs in RSS: it fills
// the writer's cache (cacheKiB) by writing a file three times its size,
// then reports the RSS the process gained per KiB of cache_size. modernc
// allocates a cached page (4 KiB plus SQLite's header) from a power-of-two
// slot, so expect about 2. Run it alone, once:
//
//	go test -run '^$' -bench CacheRSS -benchtime 1x ./internal/sqlitedb/
func BenchmarkCacheRSS(b *testing.B) {
	const cacheKiB = 16 << 10
	for i := 0; i < b.N; i++ {
		db, err := Open(filepath.Join(b.TempDir(), "x.db"), Options{Readers: 1, WriterCacheKiB: cacheKiB})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Writer.Exec(`CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
			b.Fatal(err)
		}
		before := rssKiB(b)
		blob := make([]byte, 1000)
		for row := 0; row < 3*cacheKiB; {
			tx, err := db.Writer.Begin()
			if err != nil {
				b.Fatal(err)
			}
			for end := row + 1000; row < end; row++ {
				_, _ = rand.Read(blob)
				if _, err := tx.Exec(`INSERT INTO t (k, v) VALUES (?, ?)`, row, blob); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		// Read it all back, so that the cache holds the file's pages
		// whatever the writes left in it.
		var n int64
		if err := db.Writer.QueryRow(`SELECT SUM(LENGTH(v)) FROM t`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		debug.FreeOSMemory()
		grew := rssKiB(b) - before
		b.ReportMetric(float64(grew)/cacheKiB, "rss/cache")
		b.ReportMetric(float64(grew), "rss-KiB")
		_ = db.Close()
	}
}

// rssKiB is this process's resident set, from /proc/self/status.
func rssKiB(b *testing.B) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
