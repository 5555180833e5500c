"""Tasks defined outside the bertexp package, registered through a gin
`import` line: the proof that the Task interface is a seam."""
