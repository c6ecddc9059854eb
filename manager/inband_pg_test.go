//go:build postgres

package manager_test

import "testing"

// TestAnOutcomeInBandIsNotAlsoANotice on PostgreSQL, whose wake-ups and
// marks cross connections as they cross instances.
func TestAnOutcomeInBandIsNotAlsoANoticeOnPostgreSQL(t *testing.T) {
	inBandCases(t, openPG, 4)
}
