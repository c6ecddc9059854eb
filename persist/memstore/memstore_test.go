package memstore_test

import (
	"testing"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) manager.Store { return memstore.New() })
}
