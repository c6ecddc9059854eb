//go:build postgres

package pgstore_test

import (
	"testing"

	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
)

// Task records round-trip, replace by id, delete and update by
// compare-and-set (storetest.Tasks).
func TestTaskRecords(t *testing.T) {
	storetest.Tasks(t, open(t))
}
