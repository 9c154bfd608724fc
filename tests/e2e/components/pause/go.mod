// The sandbox image's program (see main.go); no dependencies.
module modeldeployment.e2e/components/pause

go 1.25.0
