package testmodel

import (
	"strings"
	"testing"
)

func TestWordsMatchesFields(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a b ", "{\"text\":\"hello world\"}", "a\tb\nc\u00a0d", "\u2003x\u2003"} {
		if got, want := words([]byte(s)), int64(len(strings.Fields(s))); got != want {
			t.Errorf("words(%q) = %d, strings.Fields gives %d", s, got, want)
		}
	}
}

func FuzzWords(f *testing.F) {
	f.Add("hello  world")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := words([]byte(s)), int64(len(strings.Fields(s))); got != want {
			t.Fatalf("words(%q) = %d, strings.Fields gives %d", s, got, want)
		}
	})
}
