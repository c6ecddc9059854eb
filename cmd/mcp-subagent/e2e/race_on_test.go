//go:build race && (e2e || realcli || browser)

package e2e

// raceBuild: the tests run with -race, so the binary they drive is built
// with it too, and the manager's most concurrent paths (many sessions,
// children, notices) are race-checked in the real process.
const raceBuild = true
