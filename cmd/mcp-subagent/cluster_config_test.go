package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// cluster.lease_seconds sets the instance's lease; absent, the manager's
// default applies; zero, negative or absurd values are refused naming it.
func TestClusterLeaseSeconds(t *testing.T) {
	c, err := loadConfig(writeConfig(t, `{"cluster":{"lease_seconds":2.5}}`))
	if err != nil || c.Cluster.leaseTTL() != 2500*time.Millisecond {
		t.Fatalf("lease_seconds 2.5 = %v, %v; want 2.5s", c.Cluster.leaseTTL(), err)
	}
	c, err = loadConfig(writeConfig(t, `{}`))
	if err != nil || c.Cluster.leaseTTL() != 0 {
		t.Fatalf("no cluster block = %v, %v; want 0 (the manager's default, %s)", c.Cluster.leaseTTL(), err, manager.DefaultLeaseTTL)
	}
	for _, bad := range []string{`0`, `-1`, `100000`, `"30"`} {
		if _, err := loadConfig(writeConfig(t, `{"cluster":{"lease_seconds":`+bad+`}}`)); err == nil || !strings.Contains(err.Error(), "lease_seconds") {
			t.Errorf("lease_seconds %s = %v; want it refused, naming lease_seconds", bad, err)
		}
	}
}
