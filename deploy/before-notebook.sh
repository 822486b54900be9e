#!/bin/bash
# docker-stacks start hook (/usr/local/bin/before-notebook.d/): the user's own copy of the course in ~/course.
hopper-course-home || echo "hopper-course-home failed: the course's lessons and labs were not copied" >&2
