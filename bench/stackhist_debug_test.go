//go:build stackhist

package bench

// A debugging aid for BenchmarkMillionInFlight: with it, the benchmark logs
// how many goroutines hold stacks of each size at the sample (the runtime
// has no API for it, so it reads the runtime's list of goroutines: the
// stack bounds are the first two words of a g). Build it with
//
//	go test -c -tags stackhist -ldflags=-checklinkname=0 -o /tmp/million.test ./bench/

import (
	"fmt"
	"sort"
	"unsafe"
	_ "unsafe"
)

//go:linkname allgs runtime.allgs
var allgs []unsafe.Pointer

func init() { stackHist = stackHistDebug }

func stackHistDebug() string {
	h := map[uintptr]int{}
	for _, g := range allgs {
		lo := *(*uintptr)(g)
		hi := *(*uintptr)(unsafe.Add(g, 8))
		if lo != 0 {
			h[hi-lo]++
		}
	}
	var ks []uintptr
	for k := range h {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	s := ""
	for _, k := range ks {
		s += fmt.Sprintf(" %dK:%d", k>>10, h[k])
	}
	return s
}
