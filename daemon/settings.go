package daemon

import (
	"os"
	"slices"
)

// Settings are what a session's relay tells the daemon of its own
// settings: the variables that shape children (the model API's address,
// key and model, PATH for external CLIs...) and the config file it names.
// Children a session starts run with them, not the daemon's (which are
// the environment of whichever session started the daemon).
//
// Env carries secret values too: the socket is the user's own (0600, and
// a peer of another uid is refused), and the daemon keeps them in memory
// only.
type Settings struct {
	// Names are every variable the session considered, set or not: a name
	// absent from Env was unset in the session.
	Names []string `json:"names,omitempty"`
	// Env are the values of those of Names that are set.
	Env map[string]string `json:"env,omitempty"`
	// Config is the session's config file (absolute); empty: none.
	Config string `json:"config,omitempty"`
	// Secrets are those of Names whose values are secrets (keys, tokens):
	// never logged, never stored.
	Secrets []string `json:"secrets,omitempty"`
}

// SettingsDiff is how one session's settings differ from the daemon's
// own: names only, never values.
type SettingsDiff struct {
	Session   string   `json:"session"`
	Principal string   `json:"principal,omitempty"`
	ClientPID int      `json:"client_pid,omitempty"`
	Vars      []string `json:"vars,omitempty"`   // variables set differently (or set in one only)
	Config    bool     `json:"config,omitempty"` // the session names another config file
}

// Differs compares s with the daemon's own settings: lookup reads the
// daemon's environment, config is its config file. It returns the names
// of Names whose value or presence differs, sorted, and whether the
// config file differs. A nil s (a client from before settings were sent)
// differs in nothing: it runs on the daemon's own.
func (s *Settings) Differs(lookup func(string) (string, bool), config string) (vars []string, cfg bool) {
	if s == nil {
		return nil, false
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, name := range s.Names {
		mine, ok := lookup(name)
		theirs, set := s.Env[name]
		if ok != set || mine != theirs {
			vars = append(vars, name)
		}
	}
	slices.Sort(vars)
	return slices.Compact(vars), s.Config != config
}
