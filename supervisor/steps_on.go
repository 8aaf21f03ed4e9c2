//go:build !nosteps

package supervisor

// recordSteps is false only in a build with the tag nosteps: the baseline
// of the durable benchmarks (bench/durable_bench_test.go), this same tree
// with submitted runs neither recording steps nor resuming, as with a
// store that cannot resume them. No user build sets it.
const recordSteps = true
