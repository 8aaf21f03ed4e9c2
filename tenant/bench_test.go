package tenant

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkAuthenticate: the cost of one key check, which compares the
// presented key's hash with every key of the file (constant time: no
// early exit), for files of 10, 100 and 1,000 keys. The baseline is the
// SHA-256 of the key alone, which every check pays.
func BenchmarkAuthenticate(b *testing.B) {
	b.Run("sha256-alone", func(b *testing.B) {
		for b.Loop() {
			_ = Hash("sk-bench-key-0000000000")
		}
	})
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var sb strings.Builder
			sb.WriteString("keys:\n")
			for i := range n {
				fmt.Fprintf(&sb, "  - {sha256: %s, tenant: t%d, scopes: [read]}\n", Hash(fmt.Sprintf("sk-bench-key-%010d", i)), i%7)
			}
			path := filepath.Join(b.TempDir(), "keys.yaml")
			if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			k, err := New(Config{File: path})
			if err != nil {
				b.Fatal(err)
			}
			key := fmt.Sprintf("sk-bench-key-%010d", n/2)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Authenticate(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
