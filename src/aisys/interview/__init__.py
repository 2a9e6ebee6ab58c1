"""References for the interview drills of chapter 9: the answers `aisys drill check` grades against."""
