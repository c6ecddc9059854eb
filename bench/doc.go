// Package bench holds the whole-system benchmarks that need more than one
// package: the manager with the spawn provider, the bbolt store and a fake
// model. Run them with
//
//	go test -run XXX -bench . -benchtime 1x ./bench/
//
// Those of the PostgreSQL store (postgres_test.go: delegation beside bbolt,
// takeover after kill -9, a list page at 100,000 children; stepwatch_test.go:
// how late a turn's step reaches a transcript watch at another instance)
// need the build tag postgres and start throwaway servers of their own
// (internal/pgtest); run them one at a time:
//
//	go test -tags postgres -run XXX -bench PGDelegation -benchtime 1x ./bench/
//
// The figures and the commands that produced them are in BENCHMARKS.md.
package bench
