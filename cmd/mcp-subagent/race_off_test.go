//go:build !race && (e2e || realcli || browser)

package main

const raceBuild = false
