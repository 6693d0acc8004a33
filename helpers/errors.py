"""The one exception type the course raises for problems a user can fix.

A `CourseError` carries a single line that names the problem and the fix. The CLI
prints it without a traceback; notebooks show it as the cell's error.
"""


class CourseError(RuntimeError):
    """A problem with the user's input or set-up, described in one line with its fix."""
