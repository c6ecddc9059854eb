package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// scrub takes the password out of an error's text and keeps what it
// wraps; without it the text would show it.
func TestScrub(t *testing.T) {
	raw := fmt.Errorf("dial postgres://u:hunter22@h/db: %w", context.DeadlineExceeded)
	if !strings.Contains(raw.Error(), "hunter22") {
		t.Fatal("the probe's error does not hold the password")
	}
	got := scrub(raw, password("postgres://u:hunter22@h/db"))
	if strings.Contains(got.Error(), "hunter22") || !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("scrub = %v (wraps the deadline: %v)", got, errors.Is(got, context.DeadlineExceeded))
	}
	if r := Redact("postgre://u:typo@h/db"); strings.Contains(r, "typo") {
		t.Errorf("Redact of a mistyped scheme shows the password: %s", r)
	}
	for dsn, want := range map[string]string{
		"postgres://u:pw@h/db":                "pw",
		"postgresql://u@h/db?password=pw2":    "pw2",
		"host=h user=u password=pw3 dbname=d": "pw3",
		"host=h password='p w4'":              "p w4",
		"postgres://u@h/db":                   "",
		"postgres://u:bad%zz@h/db":            "bad%zz",
		"postgre://u:typo@h/db":               "typo",
	} {
		if got := password(dsn); got != want {
			t.Errorf("password(%q) = %q, want %q", dsn, got, want)
		}
	}
}
