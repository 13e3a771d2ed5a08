//go:build race

package gdn_test

const raceEnabled = true
