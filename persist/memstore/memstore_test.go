package memstore_test

import (
	"testing"

	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) seam.Store { return memstore.New() })
}

func TestShared(t *testing.T) {
	open := func(t *testing.T) (seam.Store, seam.Store) {
		s := memstore.New()
		return s, s
	}
	storetest.RunShared(t, open)
	storetest.RunSessions(t, open)
}

// Task records round-trip, replace by id, delete and update by
// compare-and-set (storetest.Tasks).
func TestTaskRecords(t *testing.T) {
	storetest.Tasks(t, memstore.New())
}
