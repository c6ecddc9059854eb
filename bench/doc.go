// Package bench holds the whole-system benchmarks that need more than one
// package: the manager with the spawn provider, the bbolt store and a fake
// model. Run them with
//
//	go test -run XXX -bench . -benchtime 1x ./bench/
//
// The figures and the commands that produced them are in BENCHMARKS.md.
package bench
