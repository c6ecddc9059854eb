//go:build !race && (e2e || realcli || browser)

package e2e

const raceBuild = false
