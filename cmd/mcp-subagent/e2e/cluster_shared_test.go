//go:build e2e || realcli || browser

package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
)

// Helpers of the tests of several serve --http instances on one
// PostgreSQL database, shared by the e2e tier (cluster_test.go,
// doctorstore_test.go), the browser tier (the web view at another
// instance) and the realcli tier (real Claude Code at two instances).

// clusterLease is the instances' cluster.lease_seconds in the cluster test:
// short, so a takeover after a kill -9 comes within the test's patience.
const clusterLease = 2 * time.Second

// doctorSecret is the password in pgURL's URLs, which no log or output
// may show.
const doctorSecret = "d0ct0r-pw-7c1"

// pgURL is a postgres:// URL of a fresh database on a server of the
// test's own, with doctorSecret as its password: trust authentication
// ignores it; it is there to be hidden.
func pgURL(t *testing.T) string {
	_, url := pgServer(t)
	return url
}

// pgServer is pgURL with its server, which a test may stop and start.
func pgServer(t *testing.T) (*pgtest.Server, string) {
	srv := pgtest.New(t)
	for _, f := range strings.Fields(srv.DSN(t)) {
		if db, ok := strings.CutPrefix(f, "dbname="); ok {
			return srv, "postgres://postgres:" + doctorSecret + "@/" + db + "?host=" + srv.SocketDir()
		}
	}
	t.Fatal("pgtest's DSN names no database")
	return nil, ""
}

// heldModel is a fake model that answers "answer to <the last user
// text>", holding its answer to a prompt of holds until that gate opens,
// and counts the requests by their last user text.
type heldModel struct {
	*fakeopenai.Server
	mu    sync.Mutex
	asked map[string]int
}

func newHeldModel(t *testing.T, holds map[string]*releaseGate) *heldModel {
	m := &heldModel{asked: map[string]int{}}
	m.Server = fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		lu := req.LastUserText()
		m.mu.Lock()
		m.asked[lu]++
		m.mu.Unlock()
		if g := holds[lu]; g != nil {
			g.wait(2 * time.Minute)
		}
		return fakeopenai.Reply{Text: "answer to " + lu}
	})
	t.Cleanup(func() {
		for _, g := range holds {
			g.open() // a held handler must not hold up Close
		}
		m.Close()
	})
	return m
}

// count is how many requests had text as their last user message.
func (m *heldModel) count(text string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.asked[text]
}

// clusterInstance is one serve --http instance on the PostgreSQL store at
// url, with a lease of clusterLease, serving principal alice.
func clusterInstance(t *testing.T, fake *fakeopenai.Server, url string) *instance {
	t.Helper()
	return start(t, fake, clusterOpts(url))
}

// clusterOpts are clusterInstance's options.
func clusterOpts(url string) serverOpts {
	cfg := `{"cluster":{"lease_seconds":` + strings.TrimSuffix(clusterLease.String(), "s") + `},` +
		`"http":{"tokens":[{"principal":"alice","token_env":"ALICE_TOKEN"}]}}`
	return serverOpts{http: true, token: aliceTok, config: cfg, env: []string{"ALICE_TOKEN=" + aliceTok},
		args: []string{"--store", url}}
}

// linesWith are the lines of log that mention s.
func linesWith(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
