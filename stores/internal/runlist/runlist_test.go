package runlist

import (
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

func TestParse(t *testing.T) {
	cur := Position{CreatedUS: -5, RunID: "a:b/c"}.Cursor()
	for _, tc := range []struct {
		f     svc.RunFilter
		limit int
		after *Position
	}{
		{svc.RunFilter{}, svc.DefaultRunPage, nil},
		{svc.RunFilter{Limit: 1, State: svc.RunFailed}, 1, nil},
		{svc.RunFilter{Limit: svc.MaxRunPage, Cursor: cur}, svc.MaxRunPage, &Position{CreatedUS: -5, RunID: "a:b/c"}},
	} {
		q, err := Parse("x", tc.f)
		if err != nil {
			t.Fatalf("Parse(%+v): %v", tc.f, err)
		}
		if q.Limit != tc.limit || q.State != tc.f.State || (q.After == nil) != (tc.after == nil) || q.After != nil && *q.After != *tc.after {
			t.Errorf("Parse(%+v) = %+v, want limit %d after %v", tc.f, q, tc.limit, tc.after)
		}
	}
	for _, f := range []svc.RunFilter{
		{Limit: -1}, {Limit: svc.MaxRunPage + 1}, {State: "done"},
		{Cursor: "%"}, {Cursor: Position{RunID: ""}.Cursor()},
		{Cursor: "djI6MTphYg"}, // v2:1:ab
		{Cursor: "djE6eDphYg"}, // v1:x:ab
		{Cursor: "djE6MQ"},     // v1:1
	} {
		if _, err := Parse("x", f); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("Parse(%+v) = %v, want a SpecValidationError", f, err)
		}
	}
}

func TestPage(t *testing.T) {
	q := Query{Limit: 2}
	rows := []Row{{Pos: Position{3, "c"}}, {Pos: Position{2, "b"}}, {Pos: Position{1, "a"}}}
	if p := q.Page(rows[:2]); len(p.Runs) != 2 || p.NextCursor != "" {
		t.Errorf("a page of exactly the limit = %+v, want no cursor", p)
	}
	p := q.Page(rows)
	if len(p.Runs) != 2 || p.NextCursor != rows[1].Pos.Cursor() {
		t.Errorf("a page with a row beyond the limit = %+v, want the cursor of row 2", p)
	}
	if p := q.Page(nil); p.Runs == nil || len(p.Runs) != 0 {
		t.Errorf("an empty page = %#v, want empty runs, not nil", p)
	}
}

func TestOrder(t *testing.T) {
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897999, time.UTC)
	// The same microsecond: the id decides, whatever the nanoseconds.
	a := Of(&svc.RunRecord{RunID: "a", CreatedAt: at})
	b := Of(&svc.RunRecord{RunID: "b", CreatedAt: at.Add(-999)})
	if !b.Before(a) || a.Before(b) || Compare(a, a) != 0 || Compare(b, a) != -1 {
		t.Errorf("positions %+v and %+v out of order", a, b)
	}
	c := Of(&svc.RunRecord{RunID: "a", CreatedAt: at.Add(time.Microsecond)})
	if !c.Before(b) {
		t.Errorf("a newer run %+v not before %+v", c, b)
	}
}

// FuzzCursor: any string parses to a position or a SpecValidationError,
// and a position's cursor parses back to it.
func FuzzCursor(f *testing.F) {
	f.Add(int64(1741964966535897), "0190a0c2-7c1e-7000-8000-000000000000", "")
	f.Add(int64(-1), ":", "djE6MTo6")
	f.Fuzz(func(t *testing.T, us int64, id, cursor string) {
		q, err := Parse("x", svc.RunFilter{Cursor: cursor})
		if err != nil && !errors.Is(err, svc.ErrSpecValidation) {
			t.Fatalf("Parse(%q) = %v", cursor, err)
		}
		if err == nil && cursor != "" && (q.After == nil || q.After.RunID == "") {
			t.Fatalf("Parse(%q) accepted %+v", cursor, q.After)
		}
		if id == "" {
			return
		}
		p := Position{CreatedUS: us, RunID: id}
		q, err = Parse("x", svc.RunFilter{Cursor: p.Cursor()})
		if err != nil || q.After == nil || *q.After != p {
			t.Fatalf("cursor of %+v parsed to %+v, %v", p, q.After, err)
		}
	})
}
