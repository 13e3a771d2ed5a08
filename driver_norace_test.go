//go:build !race

package gdnsimd_test

const driverRace = false
