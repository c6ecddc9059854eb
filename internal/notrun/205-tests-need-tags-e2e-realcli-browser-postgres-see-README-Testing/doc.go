// Package notrun exists for its directory's name. go test ./... prints one
// line per package and, for a package whose tests pass, nothing else: a
// test that skips, or a file its build tags leave out, leaves no trace. So
// this package's import path is the message: it appears in every
// go test ./... run, saying how many tests that run did not build and which
// build tags run them (README.md, Testing). Its one test keeps the number
// true, counting the Test functions of files that only build under a tier
// tag; when the count changes, the test fails naming the new directory.
package notrun
