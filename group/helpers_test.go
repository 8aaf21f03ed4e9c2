package group_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc/group"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// problems flattens err (an errors.Join of *group.Error, or one) into
// {Key, Msg} pairs, failing the test on anything else.
func problems(t *testing.T, err error) []group.Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	out := make([]group.Error, 0, len(list))
	for _, e := range list {
		var ge *group.Error
		if !errors.As(e, &ge) {
			t.Fatalf("error %v (%T) is not a *group.Error", e, e)
		}
		out = append(out, group.Error{Key: ge.Key, Msg: ge.Msg})
	}
	return out
}

// agents is a hasAgent that knows the given names.
func agents(names ...string) func(string) bool {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return func(n string) bool { return set[n] }
}
