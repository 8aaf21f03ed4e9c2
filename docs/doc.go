// Package docs holds svc's user documentation, Markdown only. Its tests
// keep the documentation true: they run every command a ```console block
// of README.md and docs/*.md shows against a real `svc serve` and diff the
// answers (ids, times and token counts normalised), refuse shell blocks
// that are neither checked nor marked skipped with a reason, and refuse
// links to files that are not in the repository.
//
//	go test ./docs                        # check
//	go test ./docs -run TestDocCommands -update   # rewrite the answers that differ
package docs
