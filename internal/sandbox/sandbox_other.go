//go:build !linux

package sandbox

import "fmt"

// ABI reports 0 off Linux: there is no Landlock.
func ABI() (int, string) { return 0, "Landlock is Linux's; this system has none" }

// Apply refuses a confined mode off Linux and does nothing otherwise.
func Apply(p Policy) (int, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	if p.Mode.Confined() {
		return 0, fmt.Errorf("cannot confine the command in mode %q: Landlock is Linux's; this system has none", p.Mode)
	}
	return 0, nil
}
